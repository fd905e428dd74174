/** The Lua scripts a producer runs, exactly as the Python package assembles them from
 * worker/tierpool/scripts/**\/*.lua (generated into scripts.json by `make ts-scripts`, drift-tested on both
 * sides), and the wire protocol version they belong to. */

import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";

export interface Script {
  readonly path: string;
  readonly includes: readonly string[];
  readonly sha: string;
  readonly source: string;
}

export type ScriptName = "SUBMIT" | "SUBMIT_ONCE" | "SUBMIT_GATED" | "SCHEDULE" | "CANCEL";

interface Bundle {
  protocol: number;
  scripts: Record<ScriptName, Script>;
}

// dist/src/scripts.js -> the package's scripts.json
const bundle = JSON.parse(readFileSync(new URL("../../scripts.json", import.meta.url), "utf8")) as Bundle;

/** The wire protocol this client writes and honours (worker/tierpool/protocol/version.py). */
export const PROTOCOL: number = bundle.protocol;

export const SCRIPTS: Readonly<Record<ScriptName, Script>> = bundle.scripts;

export function sha1Hex(text: string): string {
  return createHash("sha1").update(text, "utf8").digest("hex");
}

export const INCLUDE = "-- include:";

/** The helper paths a script's first line names (none without an include line). */
export function includes(text: string): string[] {
  const first = text.split("\n", 1)[0] ?? "";
  return first.startsWith(INCLUDE) ? first.slice(INCLUDE.length).split(/\s+/).filter(Boolean) : [];
}

/** A script's full source by the include convention of worker/tierpool/scripts/__init__.py: the bytes of each
 * helper its first line names, in order, then the script file's own bytes. `read` gives a file's text by its
 * path relative to the scripts folder. */
export function assemble(path: string, read: (path: string) => string): string {
  const text = read(path);
  const parts = includes(text).map((helper) => {
    const body = read(helper);
    if (!helper.startsWith("helpers/") || includes(body).length > 0 || !body.endsWith("\n")) {
      throw new Error(`${path} includes ${helper}: a helper under helpers/ includes nothing and ends with a newline`);
    }
    return body;
  });
  return parts.join("") + text;
}
