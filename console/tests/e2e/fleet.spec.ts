import { cluster } from "./cluster";
import { expect, shot, test } from "./fixtures";

test("the fleet shows both simulated GPUs and the view toggle works", async ({ page, problems }) => {
  void problems;
  await page.goto(`${cluster().open}/`);
  const cards = page.getByRole("article");
  await expect(cards).toHaveCount(2);
  await expect(page.getByRole("article", { name: "e2e-host · GPU 0" })).toBeVisible();
  await expect(page.getByRole("article", { name: "e2e-host · GPU 1" })).toBeVisible();
  await expect(cards.first().getByText("simulated", { exact: true })).toBeVisible();
  // Live samples reach the cards' mini-charts.
  await expect(page.getByRole("img", { name: "e2e-host · GPU 0 utilization, last hour" })).toBeVisible();
  await shot(page, "fleet-per-gpu");

  await page.getByRole("radio", { name: "Aggregated" }).click();
  await expect(page).toHaveURL(/\?view=aggregated$/);
  const totals = page.getByRole("region", { name: "fleet totals" });
  await expect(totals.getByText("2 (2 simulated)")).toBeVisible();
  await expect(page.getByRole("img", { name: "Mean utilization and memory used (%)" })).toBeVisible();
  await shot(page, "fleet-aggregated");

  // The toggle is a bookmarkable URL, and keyboard-operable.
  await page.reload();
  await expect(page.getByRole("radio", { name: "Aggregated" })).toHaveAttribute("aria-checked", "true");
  await page.getByRole("radio", { name: "Per GPU" }).focus();
  await page.keyboard.press("Enter");
  await expect(cards).toHaveCount(2);
});

test("a coordinator answers unknown files with 404 and app URLs with the app", async ({ request }) => {
  const base = cluster().open;
  const page = await request.get(`${base}/trainings/trn-nope`);
  expect(page.status()).toBe(200);
  expect(await page.text()).toContain('<div id="root">');
  const missing = await request.get(`${base}/assets/nope.js`);
  expect(missing.status()).toBe(404);
});

test("the console follows a dark system theme", async ({ page, problems }) => {
  void problems;
  await page.emulateMedia({ colorScheme: "dark" });
  await page.goto(`${cluster().open}/`);
  await expect(page.getByRole("article")).toHaveCount(2);
  const background = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  expect(background).toBe("rgb(18, 22, 28)");
  await shot(page, "fleet-dark");
  await page.goto(`${cluster().open}/trainings`);
  await shot(page, "trainings-dark");
});

test("a host's doctor runs from the fleet page and its checks are read there", async ({ page, problems }) => {
  void problems;
  test.setTimeout(120_000);
  await page.goto(`${cluster().open}/`);
  const hosts = page.getByRole("table", { name: "hosts" });
  const row = hosts.getByRole("row").filter({ has: page.getByRole("cell", { name: "e2e-host", exact: true }) });
  await expect(row).toBeVisible();
  await row.getByRole("button", { name: "Run doctor" }).click();
  await expect(row.getByText("healthy")).toBeVisible({ timeout: 90_000 });
  const report = page.getByLabel("doctor report of e2e-host");
  await expect(report).toBeVisible();
  const allReduce = report.getByRole("row").filter({ hasText: "all_reduce" });
  await expect(allReduce.getByText("pass", { exact: true })).toBeVisible();
  await expect(allReduce.getByText(/GB\/s bus bandwidth \(gloo, 2 processes/)).toBeVisible();
  await expect(report.getByRole("row").filter({ hasText: "driver" }).getByText("skip", { exact: true })).toBeVisible();
  await shot(page, "fleet-doctor");
  // Kept: a new visit shows the verdict without running it again.
  await page.reload();
  await expect(row.getByText("healthy")).toBeVisible();
});

test("a host is cordoned and uncordoned from the fleet page", async ({ page, problems }) => {
  void problems;
  await page.goto(`${cluster().open}/`);
  const hosts = page.getByRole("table", { name: "hosts" });
  const row = hosts.getByRole("row").filter({ has: page.getByRole("cell", { name: "e2e-host", exact: true }) });
  try {
    await row.getByRole("button", { name: "Cordon…" }).click();
    const form = page.getByRole("form", { name: "cordon e2e-host" });
    await form.getByLabel("Reason").fill("e2e maintenance");
    await form.getByRole("button", { name: "Cordon e2e-host" }).click();
    await expect(row.getByText("connected, cordoned: e2e maintenance")).toBeVisible();
    // The GPUs say so too (after the list's next refresh, forced by the change).
    await expect(page.getByRole("article", { name: "e2e-host · GPU 0" }).getByText("cordoned", { exact: true })).toBeVisible();
    await shot(page, "fleet-cordoned");
  } finally {
    await row.getByRole("button", { name: "Uncordon" }).click();
  }
  await expect(row.getByText("connected", { exact: true })).toBeVisible();
  await expect(page.getByRole("article", { name: "e2e-host · GPU 0" }).getByText("available", { exact: true })).toBeVisible();
});
