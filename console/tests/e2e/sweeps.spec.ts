import { writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cli, cluster, ROOT } from "./cluster";
import { expect, shot, test } from "./fixtures";

test("a sweep the coordinator runs: listed, its trials with params and the best, compared", async ({ page, problems }) => {
  void problems;
  const { open } = cluster();
  const space = join(tmpdir(), `e2e-space-${process.pid}.toml`);
  writeFileSync(space, '"optim.learning_rate" = { log_uniform = [1e-3, 1e-2] }\n"model.k" = { choice = [4, 16] }\n');
  const id = cli(open, ["sweep", "create", "--config", `${ROOT}/examples/sae.toml`, "--space", space, "--objective", "explained_variance",
    "--max-trials", "3", "--max-concurrent", "2", "--gpus", "1", "--seed", "4", "--name", "e2e-search"]).trim();
  expect(id).toMatch(/^swp-/);

  await page.goto(`${open}/sweeps`);
  await page.getByRole("link", { name: "e2e-search" }).click();
  await expect(page).toHaveURL(new RegExp(`/sweeps/${id}$`));
  const trials = page.getByRole("table", { name: "trials" });
  await expect(trials.getByRole("columnheader", { name: "optim.learning_rate" })).toBeVisible();
  await expect(trials.getByRole("columnheader", { name: "explained_variance" })).toBeVisible();
  await expect(page.getByRole("definition").filter({ hasText: /^succeeded$/ })).toBeVisible({ timeout: 240_000 });
  await expect(trials.getByRole("row")).toHaveCount(4);
  await expect(trials.getByRole("row", { name: "the best trial" })).toHaveCount(1);
  await shot(page, "sweep");
  await page.getByRole("link", { name: "Compare the trials' curves and frontier" }).click();
  await expect(page).toHaveURL(new RegExp(`/compare\\?sweep=${id}$`));
  await expect(page.getByText("3 of 3 trainings' curves loaded")).toBeVisible();
});
