/** What a producer reads back: result records and task events (tierpool.protocol.submission.TaskResult,
 * tierpool.protocol.task_state). Pure. */

/** A task's result record, as written by the worker (or the cancel) that finished it. */
export interface TaskResult {
  readonly kind: "result";
  readonly taskId: string;
  /** `succeeded`, `dead_lettered` or `cancelled`. */
  readonly status: string;
  readonly ok: boolean;
  readonly result: unknown;
  readonly error: string | undefined;
  readonly attempts: number;
  readonly tier: string | undefined;
  readonly worker: string | undefined;
  readonly queueWaitMs: number | undefined;
  readonly runMs: number | undefined;
  readonly finishedAt: number | undefined;
  /** Why a dead-lettered task was dead-lettered, or when a cancelled one was cancelled. */
  readonly reason: string | undefined;
  /** The ids of the children its run spawned (`task.spawn`), in order; undefined when it spawned none. */
  readonly children: readonly string[] | undefined;
  readonly traceback: string | undefined;
}

function opt<T>(value: unknown, kind: "string" | "number"): T | undefined {
  return typeof value === kind ? (value as T) : undefined;
}

function childIds(value: unknown): readonly string[] | undefined {
  return Array.isArray(value) ? (value as string[]) : undefined;
}

export function parseResult(text: string): TaskResult {
  const data = JSON.parse(text) as Record<string, unknown>;
  const status = String(data["status"]);
  return {
    kind: "result",
    taskId: String(data["task_id"]),
    status,
    ok: status === "succeeded",
    result: data["result"] ?? null,
    error: opt(data["error"], "string"),
    attempts: opt<number>(data["attempts"], "number") ?? 0,
    tier: opt(data["tier"], "string"),
    worker: opt(data["worker"], "string"),
    queueWaitMs: opt(data["queue_wait_ms"], "number"),
    runMs: opt(data["run_ms"], "number"),
    finishedAt: opt(data["finished_at"], "number"),
    reason: opt(data["reason"], "string"),
    children: childIds(data["children"]),
    traceback: opt(data["traceback"], "string"),
  };
}

/** One event of a task's event stream (`…:events:<task_id>`). */
export interface TaskEvent {
  readonly kind: "event";
  readonly id: string;
  /** `progress` (from the handler) or `outcome` (the final one). */
  readonly type: string;
  /** ms since the epoch. */
  readonly at: number | undefined;
  /** A progress event's data (kept as text when it is not JSON). */
  readonly data: unknown;
  /** An outcome's status: succeeded, dead_lettered or cancelled. */
  readonly status: string | undefined;
  readonly final: boolean;
}

/** An event from its stream entry's flat field list (tierpool.protocol.task_state.parse_event). */
export function parseEvent(id: string, flat: readonly string[]): TaskEvent {
  const fields = new Map<string, string>();
  for (let i = 0; i + 1 < flat.length; i += 2) fields.set(flat[i] as string, flat[i + 1] as string);
  const raw = fields.get("data");
  let data: unknown = null;
  if (raw !== undefined) {
    try {
      data = JSON.parse(raw);
    } catch {
      data = raw;
    }
  }
  const at = fields.get("at");
  const type = fields.get("type") ?? "";
  return {
    kind: "event",
    id,
    type,
    at: at !== undefined && /^[0-9]+$/.test(at) ? Number(at) : undefined,
    data,
    status: fields.get("status"),
    final: type === "outcome",
  };
}

/** What a cancel found. */
export type CancelState = "waiting" | "running" | "finished" | "unknown";

/** What a cancel found and did (tierpool.client.tracking.CancelReport). */
export interface CancelReport {
  readonly taskId: string;
  readonly state: CancelState;
  /** The result record, when the task had finished already. */
  readonly result: TaskResult | undefined;
  readonly found: boolean;
  /** A cancel was recorded: the task will not run (again), and its result will say `cancelled`. */
  readonly cancelled: boolean;
}

export function cancelReport(taskId: string, state: CancelState, result?: TaskResult): CancelReport {
  return {
    taskId,
    state,
    result,
    found: state !== "unknown",
    cancelled: state === "waiting" || state === "running",
  };
}
