// Every page of every test is watched: a console error, an uncaught
// exception, a failed request or an HTTP error fails the test. Streams the
// page itself stops when it leaves (net::ERR_ABORTED) are not failures.
import { test as base, expect, type Page } from "@playwright/test";
import { join } from "node:path";
import { idleFleet, ROOT } from "./cluster";

export const test = base.extend<{ problems: string[]; idle: void }>({
  // After every test, whatever it left running is cancelled (auto: every test).
  idle: [
    async ({}, use) => {
      await use();
      await idleFleet();
    },
    { auto: true },
  ],
  problems: async ({ page }, use) => {
    const problems: string[] = [];
    page.on("console", (m) => m.type() === "error" && problems.push(`console: ${m.text()}`));
    page.on("pageerror", (e) => problems.push(`exception: ${e.message}`));
    page.on("requestfailed", (r) => {
      const why = r.failure()?.errorText ?? "";
      if (!why.includes("ERR_ABORTED")) problems.push(`request failed: ${r.url()} ${why}`);
    });
    page.on("response", (r) => r.status() >= 400 && problems.push(`HTTP ${r.status()}: ${r.url()}`));
    await use(problems);
    expect(problems, "console errors and failed requests").toEqual([]);
  },
});

export async function shot(page: Page, name: string) {
  await page.screenshot({ path: join(ROOT, "console/test-results/screenshots", `${name}.png`), fullPage: true });
}

/** How many points a chart draws (the chart's data-points attribute). */
export async function points(page: Page, title: string): Promise<number> {
  const v = await page.getByRole("img", { name: title }).getAttribute("data-points");
  return Number(v ?? 0);
}

export { expect };
