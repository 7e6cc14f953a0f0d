"""Helpers of bench/peers.py: installing the peer servers, the files they work on, and how to call each of them."""
