import { stopCluster } from "./cluster";

export default async function teardown() {
  stopCluster();
}
