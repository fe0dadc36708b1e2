'use strict';
/**
 * The gRPC ceiling: grpc-js serving the same generated RateLimitServiceService as the real
 * service. Each request is decoded by the generated deserializer (as in the service), then a
 * fixed RateLimitResponse (OK, one status) built once at start-up is answered. Listens on
 * 127.0.0.1 on a free port and prints `listening <port>` on stdout.
 */
const grpc = require('@grpc/grpc-js');
const {
  RateLimitServiceService,
  RateLimitResponse_Code: Code,
  RateLimitResponse_RateLimit_Unit: Unit,
} = require('../dist/generated/envoy/service/ratelimit/v3/rls.js');

const RESPONSE = Object.freeze({
  overallCode: Code.OK,
  statuses: [
    {
      code: Code.OK,
      currentLimit: { name: '', requestsPerUnit: 1000000000, unit: Unit.SECOND },
      limitRemaining: 999999999,
      durationUntilReset: { seconds: 1n, nanos: 0 }, // google.protobuf.Duration.seconds is a bigint here
      quota: undefined,
    },
  ],
  requestHeadersToAdd: [],
  responseHeadersToAdd: [],
  rawBody: Buffer.alloc(0),
  dynamicMetadata: undefined,
  quota: undefined,
});

const server = new grpc.Server();
server.addService(RateLimitServiceService, {
  shouldRateLimit(call, callback) {
    // call.request has already been decoded by RateLimitServiceService's requestDeserialize.
    if (call.request.descriptors.length === 0) callback({ code: grpc.status.INVALID_ARGUMENT, details: 'no descriptors' });
    else callback(null, RESPONSE);
  },
});
server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, port) => {
  if (err) {
    console.error(err);
    process.exit(1);
  }
  console.log(`listening ${port}`);
});
process.on('SIGTERM', () => server.tryShutdown(() => process.exit(0)));
