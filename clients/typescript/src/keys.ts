/** Redis key names of a pool, as worker/tierpool/model/keys.py names them. One hash tag per pool keeps a pool's
 * keys in one cluster slot. */

/** The consumer group on every tier stream. */
export const GROUP = "workers";
/** The internal consumer that holds failed or handed-back entries until their backoff ends. */
export const RETRY_CONSUMER = "tierpool-retry";

export class PoolKeys {
  constructor(
    readonly namespace: string,
    readonly name: string,
  ) {}

  /** `"default/agents"` -> PoolKeys; a ref without a slash means the `default` namespace. */
  static parse(ref: string): PoolKeys {
    const slash = ref.lastIndexOf("/");
    const namespace = slash < 0 ? "" : ref.slice(0, slash);
    const name = ref.slice(slash + 1);
    if (!name) throw new Error(`pool reference ${JSON.stringify(ref)} should look like NAMESPACE/NAME`);
    return new PoolKeys(namespace || "default", name);
  }

  get ref(): string {
    return `${this.namespace}/${this.name}`;
  }
  get prefix(): string {
    return `tierpool:{${this.ref}}:`;
  }
  /** The published spec (JSON) a worker or the operator writes. */
  get spec(): string {
    return `${this.prefix}spec`;
  }
  tier(tier: string): string {
    return `${this.prefix}tier:${tier}`;
  }
  get dlq(): string {
    return `${this.prefix}dlq`;
  }
  result(taskId: string): string {
    return `${this.prefix}result:${taskId}`;
  }
  dedupe(taskId: string): string {
    return `${this.prefix}dedupe:${taskId}`;
  }
  cancel(taskId: string): string {
    return `${this.prefix}cancel:${taskId}`;
  }
  events(taskId: string): string {
    return `${this.prefix}events:${taskId}`;
  }
  checkpoint(taskId: string): string {
    return `${this.prefix}checkpoint:${taskId}`;
  }
  tenants(tier: string): string {
    return `${this.prefix}tenants:${tier}`;
  }
  queued(tier: string): string {
    return `${this.prefix}queued:${tier}`;
  }
  held(tier: string): string {
    return `${this.prefix}held:${tier}`;
  }
  heldSeq(tier: string): string {
    return `${this.prefix}heldseq:${tier}`;
  }
  get errors(): string {
    return `${this.prefix}errors`;
  }
  get due(): string {
    return `${this.prefix}due`;
  }
  get throttled(): string {
    return `${this.prefix}throttled`;
  }
  get stranded(): string {
    return `${this.prefix}stranded`;
  }
  get where(): string {
    return `${this.prefix}where`;
  }
}
