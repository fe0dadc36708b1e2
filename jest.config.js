/** Jest runs the TypeScript sources through swc (type checking is `tsc`'s job in `make build`). */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  transform: { '^.+\\.ts$': ['@swc/jest', { jsc: { target: 'es2022', parser: { syntax: 'typescript' } } }] },
  testTimeout: 30000,
  // Every suite closes what it opens; this only keeps a rare late handle (a library's retry
  // timer) from holding CI until its deadline after all results are in.
  forceExit: true,
};
