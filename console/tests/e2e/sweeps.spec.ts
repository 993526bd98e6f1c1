import { readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cli, cluster, ROOT } from "./cluster";
import { expect, shot, test } from "./fixtures";

test("an ASHA sweep on the frontier: listed, its trials by rung, its frontier, compared", async ({ page, problems }) => {
  void problems;
  // Five trials one after another: about two minutes on a quiet 2-core
  // machine, over three on a loaded one; the default 3 minutes is too tight.
  test.setTimeout(480_000);
  const { open } = cluster();
  // The example, long enough that the searcher sees its trials at rungs.
  const base = join(tmpdir(), `e2e-base-${process.pid}.toml`);
  writeFileSync(base, readFileSync(`${ROOT}/examples/sae.toml`, "utf8").replace(/^steps = 500\b.*$/m, "steps = 1500"));
  const space = join(tmpdir(), `e2e-space-${process.pid}.toml`);
  writeFileSync(space, '"model.k" = { choice = [2, 4, 8, 16] }\n"optim.learning_rate" = { choice = [0.01, 0.0002] }\n');
  const id = cli(open, ["sweep", "create", "--config", base, "--space", space, "--searcher", "asha", "--objective", "frontier",
    "--max-trials", "5", "--max-concurrent", "1", "--gpus", "1", "--seed", "4", "--name", "e2e-search"]).trim();
  expect(id).toMatch(/^swp-/);

  await page.goto(`${open}/sweeps`);
  await page.getByRole("link", { name: "e2e-search" }).click();
  await expect(page).toHaveURL(new RegExp(`/sweeps/${id}$`));
  const trials = page.getByRole("table", { name: "trials" });
  await expect(trials.getByRole("columnheader", { name: "model.k" })).toBeVisible();
  await expect(trials.getByRole("columnheader", { name: "distance to the frontier" })).toBeVisible();
  await expect(page.getByRole("definition").filter({ hasText: /^succeeded$/ })).toBeVisible({ timeout: 420_000 });
  await expect(trials.getByRole("row")).toHaveCount(6);
  expect(await trials.getByRole("row", { name: "on the frontier" }).count()).toBeGreaterThan(0);
  await expect(page.getByRole("img", { name: "trials by rung" })).toBeVisible();
  await expect(page.getByRole("img", { name: "final L0 against explained variance" })).toBeVisible();
  await shot(page, "sweep");
  await page.getByRole("link", { name: "Compare the trials' curves and frontier" }).click();
  await expect(page).toHaveURL(new RegExp(`/compare\\?sweep=${id}$`));
  await expect(page.getByText("5 of 5 trainings' curves loaded")).toBeVisible();
});
