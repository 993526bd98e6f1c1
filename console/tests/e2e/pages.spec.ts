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
  await shot(page, "admin");
  await page.goto(`${open}/no-such-page`);
  await expect(page.getByRole("heading", { name: "Not found" })).toBeVisible();
});
