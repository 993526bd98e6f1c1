// Writes a .gz beside every text file of dist/: the coordinator sends it to
// browsers that accept gzip (it does not compress at request time).
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { gzipSync, constants } from "node:zlib";

const TEXT = /\.(html|js|css|svg|json)$/;
let raw = 0;
let packed = 0;
function walk(dir) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path);
    else if (TEXT.test(name)) {
      const data = readFileSync(path);
      const gz = gzipSync(data, { level: constants.Z_BEST_COMPRESSION });
      writeFileSync(`${path}.gz`, gz);
      raw += data.length;
      packed += gz.length;
    }
  }
}
walk("dist");
console.log(`console: ${(raw / 1024).toFixed(0)} KiB of text, ${(packed / 1024).toFixed(0)} KiB gzipped`);
