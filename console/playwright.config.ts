// End-to-end tests in a real Chromium (Debian's, not a downloaded one)
// against a real coordinator and agent started by tests/e2e/setup.ts.
import { defineConfig } from "@playwright/test";

export default defineConfig({
  testDir: "tests/e2e",
  timeout: 180_000,
  expect: { timeout: 20_000 },
  workers: 1,
  retries: 0,
  reporter: [["list"]],
  globalSetup: "./tests/e2e/setup.ts",
  globalTeardown: "./tests/e2e/teardown.ts",
  outputDir: "test-results/output",
  use: {
    browserName: "chromium",
    launchOptions: { executablePath: process.env.COHORT_CHROMIUM ?? "/usr/bin/chromium" },
    viewport: { width: 1400, height: 900 },
    acceptDownloads: true,
  },
});
