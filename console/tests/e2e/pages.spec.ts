import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cli, cluster, ROOT } from "./cluster";
import { expect, shot, test } from "./fixtures";

test("the alerts and admin pages load and say what they hold", async ({ page, problems }) => {
  void problems;
  const { open } = cluster();
  await page.goto(`${open}/alerts`);
  await expect(page.getByRole("heading", { name: /^Active \(\d+\)$/ })).toBeVisible();
  await expect(page.getByRole("heading", { name: "Resolved in the last 24 hours" })).toBeVisible();
  await shot(page, "alerts");
  await page.getByRole("navigation").getByRole("link", { name: "Admin" }).click();
  await expect(page).toHaveURL(/\/admin$/);
  await expect(page.getByRole("heading", { name: "Quotas" })).toBeVisible();
  await expect(page.getByRole("heading", { name: "Audit log" })).toBeVisible();
  // Auth is off: the quotas say trainings belong to no team, or list them
  // as "(no team)", never that there are none while some run.
  const quotas = page.getByRole("region", { name: "Quotas" });
  await expect(quotas.getByText(/trainings belong to no team|\(no team\)/).first()).toBeVisible();
  await expect(quotas.getByText("No team has a quota, a token")).toHaveCount(0);
  await shot(page, "admin");
  await page.goto(`${open}/no-such-page`);
  await expect(page.getByRole("heading", { name: "Not found" })).toBeVisible();
});

test("a program that carries its code shows its snapshot", async ({ page, problems }) => {
  void problems;
  const { open } = cluster();
  const dir = mkdtempSync(join(tmpdir(), "cohort-code-"));
  mkdirSync(join(dir, "src"));
  writeFileSync(join(dir, "src/train.py"), 'print("hello from the snapshot", flush=True)\n');
  const python = join(process.env.COHORT_VENV ?? join(ROOT, ".venv"), "bin/python");
  writeFileSync(join(dir, "job.toml"), `[program]\ncommand = [${JSON.stringify(python)}, "train.py"]\ncode = "src"\nmemory_gib_per_rank = 1\n`);
  const id = cli(open, ["train", "submit", "--config", join(dir, "job.toml"), "--gpus", "1", "-q"]).trim();
  await page.goto(`${open}/trainings/${id}`);
  await expect(page.getByLabel("code", { exact: true })).toHaveText(/^code sha256:[0-9a-f]{12} · 1 file · \d+ B$/);
  await expect(page.locator(".title-row .state")).toHaveText("succeeded", { timeout: 60_000 });
  await expect(page.getByText("hello from the snapshot").first()).toBeVisible();
  await expect(page.getByLabel("report code")).toContainText(/^Ran code sha256:[0-9a-f]{12}/);
  await shot(page, "training-code");
});
