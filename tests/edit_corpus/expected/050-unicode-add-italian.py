# -*- coding: utf-8 -*-
"""Localised greetings for the welcome screen."""

GREETINGS = {
    "en": "Hello, {name}!",
    "de": "Grüß dich, {name}!",
    "fr": "Bonjour, {name} !",
    "es": "¡Hola, {name}!",
    "it": "Ciao, {name}!",
    "ja": "こんにちは、{name}さん！",
    "ru": "Привет, {name}!",
    "el": "Γειά σου, {name}!",
}

FAREWELLS = {
    "en": "Goodbye 👋",
    "de": "Tschüss 👋",
    "ja": "さようなら 👋",
}


def greet(name: str, lang: str = "en") -> str:
    template = GREETINGS.get(lang, GREETINGS["en"])
    return template.format(name=name)


def farewell(lang: str = "en") -> str:
    return FAREWELLS.get(lang, FAREWELLS["en"])
