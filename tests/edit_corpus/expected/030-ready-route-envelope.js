'use strict';

const express = require('express');
const { loadConfig } = require('./config');
const db = require('./db');

const app = express();
const config = loadConfig(process.env.APP_ENV || 'development');

app.use(express.json({ limit: '1mb' }));

app.get('/health', (req, res) => {
  res.json({ ok: true, version: config.version });
});

app.get('/ready', async (req, res) => {
  res.status((await db.ping()) ? 200 : 503).end();
});

app.get('/users/:id', async (req, res) => {
  try {
    const user = await db.users.find(req.params.id);
    if (!user) {
      return res.status(404).json({ error: 'not found' });
    }
    res.json(user);
  } catch (err) {
    console.error(err);
    res.status(500).json({ error: 'internal error' });
  }
});

app.get('/orders/:id', async (req, res) => {
  try {
    const order = await db.orders.find(req.params.id);
    if (!order) {
      return res.status(404).json({ error: 'not found' });
    }
    res.json(order);
  } catch (err) {
    console.error(err);
    res.status(500).json({ error: 'internal error' });
  }
});

app.post('/orders', async (req, res) => {
  const { items, customerId } = req.body;
  if (!Array.isArray(items) || items.length === 0) {
    return res.status(400).json({ error: 'items required' });
  }
  const order = await db.orders.create({ items, customerId });
  res.status(201).json(order);
});

const port = Number(process.env.PORT) || config.port;
app.listen(port, () => {
  console.log(`listening on ${port}`);
});

module.exports = app;
