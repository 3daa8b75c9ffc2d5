import { configDefaults, defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // The structural type test runs in the typecheck pool only (below).
    exclude: [...configDefaults.exclude, 'test/types.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    // Each file makes its own test stores; the server serves them all.
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // tsc checks test/types.test.ts (and, through it, the whole project):
    // a type error fails the run.
    typecheck: {
      enabled: true,
      include: ['test/types.test.ts'],
      tsconfig: './tsconfig.json',
    },
  },
})
