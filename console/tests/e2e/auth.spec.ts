import { cli, cluster, ROOT } from "./cluster";
import { expect, shot, test } from "./fixtures";

async function signIn(page: import("@playwright/test").Page, url: string, secret: string) {
  await page.goto(url);
  await page.getByLabel("Token").fill(secret);
  await page.getByRole("button", { name: "Use token" }).click();
}

test("with token auth a viewer sees no submit or cancel, and another team sees nothing", async ({ page, problems }) => {
  void problems;
  const { secured, tokens } = cluster();
  // team-a's editor submits (no agent: it waits in the queue).
  const id = cli(secured, ["train", "submit", "-q", "--config", `${ROOT}/examples/sae.toml`, "--gpus", "1", "--name", "team-a-job"], tokens["editor-a"]).trim();
  expect(id).toMatch(/^trn-[0-9a-f]+$/);

  await page.goto(`${secured}/trainings`);
  // Signing in is a prompt, not an error: the first WhoAmI is answered 401-as-gRPC.
  await expect(page.getByRole("heading", { name: "Sign in" })).toBeVisible();
  await shot(page, "sign-in");
  await page.getByLabel("Token").fill(tokens["viewer-a"]);
  await page.getByRole("button", { name: "Use token" }).click();
  await expect(page.getByRole("link", { name: id })).toBeVisible();
  await expect(page.getByRole("link", { name: "New training" })).toHaveCount(0);
  await page.getByRole("link", { name: id }).click();
  await expect(page.getByRole("heading", { name: "team-a-job" })).toBeVisible();
  await expect(page.getByRole("button", { name: "Cancel training" })).toHaveCount(0);
  await page.goto(`${secured}/new`);
  await expect(page.getByText(/may not submit trainings/)).toBeVisible();

  // The token lives in this tab only: a new tab asks again.
  const other = await page.context().newPage();
  await other.goto(`${secured}/trainings`);
  await expect(other.getByRole("heading", { name: "Sign in" })).toBeVisible();
  await other.close();

  await page.getByRole("button", { name: "Sign out" }).click();
  await signIn(page, `${secured}/trainings`, tokens["editor-b"]);
  await expect(page.getByRole("navigation").getByRole("link", { name: "New training" })).toBeVisible();
  await expect(page.getByText("No training matches.")).toBeVisible();
  await page.goto(`${secured}/trainings/${id}`);
  await expect(page.getByRole("alert")).toHaveText(/belongs to another team/);
  await expect(page.getByText("team-a-job")).toHaveCount(0);
});
