import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { ROOT, startCluster } from "./cluster";

export default async function setup() {
  mkdirSync(join(ROOT, "console/test-results/screenshots"), { recursive: true });
  await startCluster();
}
