'use strict';
/**
 * The HTTP ceiling: a bare node:http server. POST /json reads the whole request body (as the
 * real service must) and answers a fixed JSON body built once at start-up, shaped like the
 * service's answer for one descriptor. Listens on 127.0.0.1 on a free port and prints
 * `listening <port>` on stdout.
 */
const http = require('node:http');

const BODY = Buffer.from(
  JSON.stringify({
    overallCode: 'OK',
    statuses: [
      {
        code: 'OK',
        currentLimit: { requestsPerUnit: 1000000000, unit: 'SECOND' },
        limitRemaining: 999999999,
        durationUntilReset: '1s',
      },
    ],
  }),
);

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    if (req.url !== '/json' || req.method !== 'POST') {
      res.statusCode = 404;
      res.end('404 page not found\n');
      return;
    }
    res.statusCode = 200;
    res.setHeader('Content-Type', 'application/json');
    res.end(BODY);
  });
});
server.listen(0, '127.0.0.1', () => console.log(`listening ${server.address().port}`));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
