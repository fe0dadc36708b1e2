/**
 * RLQS: a BucketId (a map of string pairs, order-free) placed on a domain's descriptor tree —
 * exact key and value first, then a wildcard value, then the key alone; ties to the smaller key.
 */
import { load } from './helpers';

const c = load(`domain: d
descriptors:
  - key: tenant
    descriptors:
      - key: method
        value: POST
        rate_limit: {unit: minute, requests_per_unit: 10}
      - key: path
        value: /api/*
        rate_limit: {unit: minute, requests_per_unit: 20}
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 30}
      - key: app
        rate_limit: {unit: minute, requests_per_unit: 80}
  - key: tenant
    value: acme
    descriptors:
      - key: method
        rate_limit: {unit: second, requests_per_unit: 40}
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: zone
    value: eu
    descriptors:
      - key: app
        rate_limit: {unit: second, requests_per_unit: 50}
  - key: app
    descriptors:
      - key: zone
        rate_limit: {unit: second, requests_per_unit: 60}
      - key: tenant
        rate_limit: {unit: second, requests_per_unit: 70}
`);

const place = (pairs: Record<string, string>, domain = 'd') => c.bucketDescriptor(domain, new Map(Object.entries(pairs)))?.entries.map((e) => `${e.key}=${e.value}`);
const limitOf = (pairs: Record<string, string>) => {
  const d = c.bucketDescriptor('d', new Map(Object.entries(pairs)));
  return d && c.getLimit('d', d)?.limit.requestsPerUnit;
};

test('the pairs are ordered along the tree, whatever their order in the map', () => {
  expect(place({ method: 'POST', tenant: 'globex' })).toEqual(['tenant=globex', 'method=POST']);
  expect(place({ tenant: 'globex', method: 'POST' })).toEqual(['tenant=globex', 'method=POST']);
  expect(limitOf({ method: 'POST', tenant: 'globex' })).toBe(10);
});

test('an exact value wins over the key alone; a wildcard value over the key alone', () => {
  expect(limitOf({ tenant: 'acme', method: 'GET' })).toBe(40);
  expect(limitOf({ tenant: 'globex', path: '/api/x' })).toBe(20);
  expect(limitOf({ tenant: 'globex', path: '/web' })).toBe(30);
  expect(limitOf({ remote_address: '192.0.2.7' })).toBe(5);
});

test('at one level, an exact match of one pair wins over a bare-key match of another; between bare keys the smaller goes first', () => {
  expect(place({ app: 'web', zone: 'eu' })).toEqual(['zone=eu', 'app=web']);
  expect(limitOf({ app: 'web', zone: 'eu' })).toBe(50);
  expect(place({ app: 'web', zone: 'us' })).toEqual(['app=web', 'zone=us']);
  expect(limitOf({ app: 'web', zone: 'us' })).toBe(60);
  expect(place({ tenant: 't', app: 'web' })).toEqual(['app=web', 'tenant=t']);
  expect(limitOf({ tenant: 't', app: 'web' })).toBe(70);
  // remote_address and tenant both match by key alone at the top; tenant has no remote_address below
  expect(place({ tenant: 'x', remote_address: 'y' })).toBeUndefined();
});

test('a pair with no place, an empty map, an unknown domain: no descriptor', () => {
  expect(place({ tenant: 'globex', colour: 'red' })).toBeUndefined();
  expect(place({})).toBeUndefined();
  expect(place({ remote_address: 'x' }, 'nope')).toBeUndefined();
});

test('a path that ends above the limits is a descriptor with no limit', () => {
  expect(place({ tenant: 'globex' })).toEqual(['tenant=globex']);
  expect(limitOf({ tenant: 'globex' })).toBeUndefined();
});
