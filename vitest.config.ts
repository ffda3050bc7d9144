import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Multi-process tests start UCX peers; two files at a time fit a 2-core machine.
    maxWorkers: 2,
  },
});
