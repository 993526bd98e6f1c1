import { readFileSync } from "node:fs";
import { join } from "node:path";
import { cli, cluster, ROOT } from "./cluster";
import { expect, points, shot, test } from "./fixtures";

test("a training submitted from the form trains to the end, live, and its checkpoint downloads", async ({ page, problems }) => {
  void problems;
  await page.goto(`${cluster().open}/new`);
  await page.getByLabel("Name", { exact: true }).fill("e2e-form");
  await page.getByLabel("Steps", { exact: true }).fill("400");
  await page.getByLabel("Checkpoint every (steps)").fill("100");
  // The GPU selector: the estimate against each GPU, then Recommend.
  await expect(page.getByRole("meter", { name: "estimated memory on e2e-host GPU 0" })).toContainText(/MiB of 16 GiB/);
  await page.getByRole("button", { name: "Recommend" }).click();
  await expect(page.getByRole("status").filter({ hasText: /Recommended|global batch/ }).first()).toBeVisible();
  await page.getByLabel(/e2e-host · GPU 0/).check();
  await page.getByLabel(/e2e-host · GPU 1/).check();
  await expect(page.getByText("This selection fits.")).toBeVisible();
  await expect(page.getByText(/Global batch 512 \(256 per rank\)/)).toBeVisible();
  await shot(page, "new-training");

  // A bad field is refused by the server, shown beside the field.
  await page.getByLabel("k", { exact: true }).fill("0");
  await page.getByRole("button", { name: "Submit training" }).click();
  await expect(page.locator("#k-error")).toBeVisible();
  await page.getByLabel("k", { exact: true }).fill("8");
  await page.getByRole("button", { name: "Submit training" }).click();

  await expect(page).toHaveURL(/\/trainings\/trn-[0-9a-f]+$/);
  const id = page.url().split("/").pop()!;
  await expect(page.getByRole("heading", { name: "e2e-form" })).toBeVisible();
  // The loss chart gains points while it trains.
  await expect.poll(() => points(page, "Loss and MSE"), { timeout: 60_000 }).toBeGreaterThan(0);
  const early = await points(page, "Loss and MSE");
  await expect(page.locator(".state").first()).toHaveText("succeeded", { timeout: 150_000 });
  await expect.poll(() => points(page, "Loss and MSE")).toBeGreaterThan(early);
  await expect(page.getByRole("img", { name: "Explained variance" })).toBeVisible();
  // The logs pane shows the ranks' lines.
  await expect(page.getByLabel("log lines")).toContainText("finished step 400");
  await expect(page.getByRole("table", { name: "ranks" }).getByRole("row")).toHaveCount(3);
  await shot(page, "training");

  // A checkpoint downloads (native).
  const checkpoints = page.getByRole("table", { name: "checkpoints" });
  await expect(checkpoints.getByRole("row").nth(1)).toBeVisible();
  const [download] = await Promise.all([page.waitForEvent("download"), checkpoints.getByRole("button", { name: "Native" }).first().click()]);
  expect(download.suggestedFilename()).toContain(`${id}-step-`);
  const file = await download.path();
  expect(readFileSync(file).length).toBeGreaterThan(1000);

  await page.getByRole("link", { name: "Trainings" }).click();
  await expect(page.getByRole("link", { name: id })).toBeVisible();
  await expect(page.getByRole("row", { name: new RegExp(id) })).toContainText("succeeded");
  await shot(page, "trainings");
});

test("an elastic training's page draws its size over time as it grows", async ({ page, problems }) => {
  void problems;
  const { open } = cluster();
  const config = join(ROOT, "examples/sae.toml");
  // One GPU held, so the elastic training (1..2) starts at 1; then freed.
  const blocker = cli(open, ["train", "submit", "--config", config, "--steps", "100000", "--gpus", "1", "--name", "e2e-blocker", "--quiet"]).trim();
  const id = cli(open, ["train", "submit", "--config", config, "--steps", "4000", "--gpus", "1..2", "--name", "e2e-elastic", "--quiet"]).trim();
  await page.goto(`${open}/trainings/${id}`);
  await expect(page.getByRole("img", { name: /^size over time: 1 from / })).toBeVisible({ timeout: 60_000 });
  cli(open, ["train", "cancel", blocker]);
  await expect(page.getByRole("img", { name: /^size over time: 1 from .*, 2 from / })).toBeVisible({ timeout: 90_000 });
  await expect(page.getByLabel("scheduling")).toContainText("resized 1×");
  await expect(page.getByRole("list", { name: "events" })).toContainText(/resized: 1 → 2 ranks at step \d+/);
  await shot(page, "elastic");
  cli(open, ["train", "cancel", id]);
});
