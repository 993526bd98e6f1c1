import { cluster } from "./cluster";
import { expect, test } from "./fixtures";

test("the config editor reads TOML on the server and shows its errors", async ({ page, problems }) => {
  void problems;
  await page.goto(`${cluster().open}/new`);
  await page.getByLabel("Steps", { exact: true }).fill("40");
  await page.getByRole("radio", { name: "Config editor" }).click();
  const editor = page.getByLabel("Config (as cohort train submit --config reads it)");
  await expect(editor).toHaveValue(/\[model\]\nd_in = 64\n/);
  await expect(editor).toHaveValue(/steps = 40/);
  // A bad value: the server names the field.
  await editor.fill((await editor.inputValue()).replace("d_in = 64", "d_in = 0"));
  await expect(page.getByRole("alert").filter({ hasText: "model.d_in" })).toBeVisible();
  await expect(page.getByRole("button", { name: "Submit training" })).toBeDisabled();
  // A key that does not exist is refused too (the parser is strict).
  await editor.fill((await editor.inputValue()).replace("d_in = 0", "d_in = 32\nd_typo = 1"));
  await expect(page.getByRole("alert").filter({ hasText: "d_typo" })).toBeVisible();
  await editor.fill((await editor.inputValue()).replace("\nd_typo = 1", ""));
  await expect(page.getByRole("meter", { name: "estimated memory on e2e-host GPU 0" })).toContainText(/of 16 GiB/);
  await page.getByLabel("Name", { exact: true }).fill("e2e-editor");
  await page.getByRole("button", { name: "Submit training" }).click();
  await expect(page).toHaveURL(/\/trainings\/trn-[0-9a-f]+$/);
  await expect(page.getByRole("heading", { name: "e2e-editor" })).toBeVisible();
  await expect(page.locator(".state").first()).toHaveText("succeeded", { timeout: 150_000 });
});
