import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    // Each file makes its own test stores; the server serves them all.
    testTimeout: 60_000,
    hookTimeout: 120_000,
  },
})
