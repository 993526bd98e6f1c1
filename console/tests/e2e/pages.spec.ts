import { cluster } from "./cluster";
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
