// Jest setup of the second end-to-end pass (jest.config.js): services start on grpc-js.
process.env.E2E_GRPC_TRANSPORT = 'grpc-js';
