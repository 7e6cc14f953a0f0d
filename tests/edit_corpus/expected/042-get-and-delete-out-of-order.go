package cache

import (
	"container/list"
	"sync"
	"time"
)

// Cache is a size-bounded LRU cache whose entries expire after a TTL.
type Cache struct {
	mu       sync.Mutex
	capacity int
	ttl      time.Duration
	order    *list.List
	items    map[string]*list.Element
}

type entry struct {
	key     string
	value   []byte
	expires time.Time
	hits    int
}

// New returns a cache holding at most capacity entries for ttl each.
func New(capacity int, ttl time.Duration) *Cache {
	return &Cache{
		capacity: capacity,
		ttl:      ttl,
		order:    list.New(),
		items:    make(map[string]*list.Element),
	}
}

// Get returns the value for key and whether it was present and fresh.
func (c *Cache) Get(key string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return nil, false
	}
	e := el.Value.(*entry)
	if time.Now().After(e.expires) {
		c.removeElement(el)
		return nil, false
	}
	c.order.MoveToFront(el)
	e.hits++
	return e.value, true
}

// Put stores value under key, evicting the least recently used entry if full.
func (c *Cache) Put(key string, value []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		e := el.Value.(*entry)
		e.value = value
		e.expires = time.Now().Add(c.ttl)
		c.order.MoveToFront(el)
		return
	}
	el := c.order.PushFront(&entry{key: key, value: value, expires: time.Now().Add(c.ttl)})
	c.items[key] = el
	if c.order.Len() > c.capacity {
		c.removeElement(c.order.Back())
	}
}

// Delete removes key if present.
func (c *Cache) Delete(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.removeElement(el)
	}
}

// Len reports the number of entries, fresh or not.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

func (c *Cache) removeElement(el *list.Element) {
	c.order.Remove(el)
	delete(c.items, el.Value.(*entry).key)
}
