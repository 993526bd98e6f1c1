import { cli, cluster, ROOT } from "./cluster";
import { expect, shot, test } from "./fixtures";

test("a sweep's trainings are found by label and compared: overlaid curves and the frontier", async ({ page, problems }) => {
  void problems;
  const { open } = cluster();
  const out = cli(open, ["train", "sweep", "--config", `${ROOT}/examples/sae.toml`, "--set", "model.k=4,16", "--set", "optim.steps=80", "--name", "e2e-sweep", "--gpus", "1"]);
  expect(out).toContain("sweep e2e-sweep: 2 trainings");
  expect(out).toContain(`${open}/compare?sweep=e2e-sweep`);

  await page.goto(`${open}/trainings?label=sweep%3De2e-sweep`);
  await expect(page.getByRole("row")).toHaveCount(3);
  await expect(page.getByRole("row").filter({ hasText: "succeeded" })).toHaveCount(2, { timeout: 150_000 });
  await page.getByRole("link", { name: "Compare sweep e2e-sweep" }).click();
  await expect(page).toHaveURL(/\/compare\?sweep=e2e-sweep$/);
  await expect(page.getByText("2 of 2 trainings' curves loaded")).toBeVisible();
  await expect(page.getByRole("img", { name: "loss by step" })).toHaveAttribute("data-points", /^[1-9]/);
  const frontier = page.getByRole("img", { name: "final L0 against explained variance" });
  await expect(frontier.locator("circle")).toHaveCount(2);
  const table = page.getByRole("table", { name: "compared trainings" });
  await expect(table.getByRole("columnheader", { name: "model.k" })).toBeVisible();
  await expect(table.getByRole("row")).toHaveCount(3);
  await page.getByLabel("Metric").selectOption("l0");
  await expect(page.getByRole("img", { name: "l0 by step" })).toBeVisible();
  await shot(page, "compare");
});
