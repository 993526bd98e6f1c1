// A plain ustar archive of a few files, to save a multi-file checkpoint as
// one download (browsers ask before saving several files at once).
const BLOCK = 512;

function header(name: string, size: number, mtime: number): Uint8Array {
  const h = new Uint8Array(BLOCK);
  const enc = new TextEncoder();
  const put = (s: string, at: number, len: number) => h.set(enc.encode(s).slice(0, len), at);
  const octal = (n: number, len: number) => n.toString(8).padStart(len - 1, "0") + "\0";
  let prefix = "";
  let base = name;
  if (enc.encode(name).length > 100) {
    const cut = name.lastIndexOf("/", 155);
    prefix = name.slice(0, cut);
    base = name.slice(cut + 1);
  }
  put(base, 0, 100);
  put(octal(0o644, 8), 100, 8);
  put(octal(0, 8), 108, 8);
  put(octal(0, 8), 116, 8);
  put(octal(size, 12), 124, 12);
  put(octal(mtime, 12), 136, 12);
  put("        ", 148, 8);
  put("0", 156, 1);
  put("ustar\u000000", 257, 8);
  put(prefix, 345, 155);
  const sum = h.reduce((a, b) => a + b, 0);
  put(octal(sum, 7) + " ", 148, 8);
  return h;
}

export function tar(files: { name: string; data: Blob }[]): Blob {
  const parts: BlobPart[] = [];
  const now = Math.floor(Date.now() / 1000);
  for (const f of files) {
    parts.push(header(f.name, f.data.size, now) as BlobPart, f.data);
    const pad = (BLOCK - (f.data.size % BLOCK)) % BLOCK;
    if (pad) parts.push(new Uint8Array(pad) as BlobPart);
  }
  parts.push(new Uint8Array(2 * BLOCK) as BlobPart);
  return new Blob(parts, { type: "application/x-tar" });
}
