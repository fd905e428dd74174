export { BATCH_CHUNK, Client, loadSpec, type ClientOptions, type SpecSource } from "./client.js";
export { EVENTS_MAXLEN } from "./cancel.js";
export { TaskTimeoutError } from "./follow.js";
export { GROUP, PoolKeys, RETRY_CONSUMER } from "./keys.js";
export type { CancelReport, CancelState, TaskEvent, TaskResult } from "./records.js";
export { PROTOCOL } from "./scripts.js";
export { parseSpec, ProtocolError, UnknownPool, type PoolSpec, type TierSpec } from "./spec.js";
export type { TaskState, TaskStatus } from "./status.js";
export { MAX_TASK_ID_LENGTH, SubmitError, type SubmitOptions, type TaskRequest } from "./submission.js";
