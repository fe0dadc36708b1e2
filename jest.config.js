/**
 * Jest runs the TypeScript sources through swc (type checking is `tsc`'s job in `make build`).
 * Two passes: every test on the default settings, then the end-to-end suite again with
 * GRPC_TRANSPORT=grpc-js, so both gRPC transports pass every end-to-end test.
 */
const base = {
  testEnvironment: 'node',
  testMatch: ['**/*.test.ts'],
  transform: { '^.+\\.ts$': ['@swc/jest', { jsc: { target: 'es2022', parser: { syntax: 'typescript' } } }] },
};

module.exports = {
  testTimeout: 30000,
  projects: [
    { ...base, displayName: 'default', roots: ['<rootDir>/test'] },
    { ...base, displayName: 'e2e on grpc-js', roots: ['<rootDir>/test/e2e'], setupFiles: ['<rootDir>/test/support/grpc-js-transport.js'] },
  ],
};
