/** The parts of a pool's spec a producer needs, read from the spec JSON a worker or the operator publishes at
 * `tierpool:{NAMESPACE/NAME}:spec` (or given as the same JSON: the AgentPool's `spec`). */

import { PROTOCOL } from "./scripts.js";

export interface TierSpec {
  readonly name: string;
  /** An existing stream key the tier adopts instead of its own (`tiers[].stream`), or undefined. */
  readonly stream: string | undefined;
  /** Most admitted tasks per tenant on this tier; undefined: no tenant gate. */
  readonly tenantConcurrency: number | undefined;
}

export interface PoolSpec {
  /** The wire protocol of whoever published the spec; undefined for a publisher of protocol 9 or older. */
  readonly protocol: number | undefined;
  readonly tiers: readonly TierSpec[];
  /** The consumer group the workers read every tier stream through (`consumerGroup`, default `workers`). */
  readonly consumerGroup: string;
  readonly resultTtlS: number;
  readonly maxPayloadBytes: number;
  readonly dedupeWindowS: number;
  readonly rateLimits: readonly string[];
  readonly waitReplicas: number;
  readonly waitTimeoutS: number;
}

export class UnknownPool extends Error {
  constructor(readonly ref: string) {
    super(
      `pool ${ref} is not known in this Redis: neither a worker nor the operator has published its spec yet. ` +
        "Pass the pool's spec itself instead of only its name, or start a worker for the pool (the operator " +
        "publishes the spec when it reconciles the AgentPool)",
    );
    this.name = "UnknownPool";
  }
}

/** A published spec from a newer protocol than this client speaks: it may ask for rules this client cannot
 * follow, so nothing is written. */
export class ProtocolError extends Error {
  constructor(
    readonly ref: string,
    readonly protocol: number,
  ) {
    super(
      `pool ${ref} speaks protocol ${protocol}, newer than this client's (${PROTOCOL}): upgrade @tierpool/client ` +
        "before submitting to it",
    );
    this.name = "ProtocolError";
  }
}

const DURATION = /^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$/;
const PART = /([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)/g;
const UNIT_SECONDS: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600 };

/** Seconds of a duration string (`"7m"`, `"1h30m"`, `"250ms"`) or a plain number of seconds, as
 * tierpool.model.durations.parse_duration reads them. */
export function parseDuration(value: unknown, what: string): number {
  if (typeof value === "number" && Number.isFinite(value) && value >= 0) return value;
  if (typeof value === "string" && DURATION.test(value.trim())) {
    let seconds = 0;
    for (const [, n, unit] of value.trim().matchAll(PART)) seconds += Number(n) * (UNIT_SECONDS[unit ?? "s"] ?? 1);
    return seconds;
  }
  throw new Error(`${what}: ${JSON.stringify(value)} is not a duration`);
}

function record(value: unknown, what: string): Record<string, unknown> {
  if (value === undefined || value === null) return {};
  if (typeof value !== "object" || Array.isArray(value)) throw new Error(`${what} must be an object`);
  return value as Record<string, unknown>;
}

function wholeNumber(value: unknown, fallback: number, what: string): number {
  if (value === undefined || value === null) return fallback;
  if (typeof value !== "number" || !Number.isInteger(value)) throw new Error(`${what} must be a whole number`);
  return value;
}

/** A spec from its JSON text or parsed object; Error naming the field that is not what a spec holds. The
 * defaults are the Python model's (tierpool.model.spec). */
export function parseSpec(raw: string | Record<string, unknown>): PoolSpec {
  const data = record(typeof raw === "string" ? (JSON.parse(raw) as unknown) : raw, "spec");
  const tiersRaw = data["tiers"];
  if (!Array.isArray(tiersRaw) || tiersRaw.length === 0) throw new Error("spec.tiers must be a non-empty list");
  const tiers = tiersRaw.map((item: unknown, i) => {
    const tier = record(item, `spec.tiers[${i}]`);
    if (typeof tier["name"] !== "string" || !tier["name"]) throw new Error(`spec.tiers[${i}].name must be text`);
    const limit = tier["tenantConcurrency"];
    const stream = tier["stream"];
    if (stream !== undefined && stream !== null && (typeof stream !== "string" || !stream)) {
      throw new Error(`spec.tiers[${i}].stream must be a stream key`);
    }
    return {
      name: tier["name"],
      stream: typeof stream === "string" ? stream : undefined,
      tenantConcurrency: limit === undefined || limit === null ? undefined : wholeNumber(limit, 0, "tenantConcurrency"),
    };
  });
  const tasks = record(data["tasks"], "spec.tasks");
  const redis = record(data["redis"], "spec.redis");
  const limits = data["rateLimits"] ?? [];
  if (!Array.isArray(limits)) throw new Error("spec.rateLimits must be a list");
  const protocol = data["protocol"];
  const group = data["consumerGroup"] ?? "workers";
  if (typeof group !== "string" || !group) throw new Error("spec.consumerGroup must be a group name");
  return {
    consumerGroup: group,
    protocol: protocol === undefined || protocol === null ? undefined : wholeNumber(protocol, 0, "spec.protocol"),
    tiers,
    resultTtlS: parseDuration(tasks["resultTTL"] ?? 3600, "spec.tasks.resultTTL"),
    maxPayloadBytes: wholeNumber(tasks["maxPayloadBytes"], 262_144, "spec.tasks.maxPayloadBytes"),
    dedupeWindowS: parseDuration(tasks["dedupeWindow"] ?? 3600, "spec.tasks.dedupeWindow"),
    rateLimits: limits.map((limit: unknown, i) => {
      const name = record(limit, `spec.rateLimits[${i}]`)["name"];
      if (typeof name !== "string") throw new Error(`spec.rateLimits[${i}].name must be text`);
      return name;
    }),
    waitReplicas: wholeNumber(redis["waitReplicas"], 0, "spec.redis.waitReplicas"),
    waitTimeoutS: parseDuration(redis["waitTimeout"] ?? 0.5, "spec.redis.waitTimeout"),
  };
}

/** ProtocolError when the spec was published by a newer protocol than this client's. */
export function checkProtocol(ref: string, spec: PoolSpec): void {
  if (spec.protocol !== undefined && spec.protocol > PROTOCOL) throw new ProtocolError(ref, spec.protocol);
}

/** Seconds as whole ms, rounded down (tierpool.model.durations.ms_floor). */
export function msFloor(seconds: number): number {
  return Math.trunc(seconds * 1000);
}

/** Seconds as whole ms, rounded up (ms_ceil). */
export function msCeil(seconds: number): number {
  return Math.ceil(seconds * 1000);
}

/** How long a cancel marker is kept: as long as a result record or a dedupe key, at least a day
 * (tierpool.protocol.task_state.marker_ttl_ms). */
export function markerTtlMs(spec: PoolSpec): number {
  return msFloor(Math.max(spec.resultTtlS, spec.dedupeWindowS, 86_400));
}
