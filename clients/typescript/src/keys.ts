/** Redis key names of a pool, as worker/tierpool/model/keys.py names them. One hash tag per pool keeps a pool's
 * keys in one cluster slot. */

/** The consumer group on every tier stream. */
export const GROUP = "workers";
/** The internal consumer that holds failed or handed-back entries until their backoff ends. */
export const RETRY_CONSUMER = "tierpool-retry";

export class PoolKeys {
  /** `group`: the consumer group the workers read every tier stream through (`spec.consumerGroup`); `adopted`:
   * tier -> the existing stream key it adopts instead of its own (`tiers[].stream`). */
  constructor(
    readonly namespace: string,
    readonly name: string,
    readonly group: string = GROUP,
    readonly adopted: ReadonlyMap<string, string> = new Map(),
  ) {}

  /** `"default/agents"` -> PoolKeys; a ref without a slash means the `default` namespace. */
  static parse(ref: string, group: string = GROUP, adopted: ReadonlyMap<string, string> = new Map()): PoolKeys {
    const slash = ref.lastIndexOf("/");
    const namespace = slash < 0 ? "" : ref.slice(0, slash);
    const name = ref.slice(slash + 1);
    if (!name) throw new Error(`pool reference ${JSON.stringify(ref)} should look like NAMESPACE/NAME`);
    return new PoolKeys(namespace || "default", name, group, adopted);
  }

  /** These keys with a spec's consumer group and adopted streams. */
  withSpec(spec: { readonly consumerGroup: string; readonly tiers: ReadonlyArray<{ name: string; stream: string | undefined }> }): PoolKeys {
    const adopted = new Map(spec.tiers.flatMap((tier) => (tier.stream === undefined ? [] : [[tier.name, tier.stream] as [string, string]])));
    return new PoolKeys(this.namespace, this.name, spec.consumerGroup, adopted);
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
  /** The tier's stream: the one it adopts (`tiers[].stream`), else the pool's own. */
  tier(tier: string): string {
    return this.adopted.get(tier) ?? this.ownTier(tier);
  }
  /** The stream key the pool gives a tier that adopts none. */
  ownTier(tier: string): string {
    return `${this.prefix}tier:${tier}`;
  }
  /** The tier a place in the task-id index names (`stream:<name>:<id>`: a stream by its key's last part, as
   * helpers/where.lua writes it): the tier of that name, else one whose adopted stream's key ends so. */
  tierOfPlace(name: string, tiers: readonly string[]): string | undefined {
    if (tiers.includes(name)) return name;
    return tiers.find((tier) => /([^:]+)$/.exec(this.tier(tier))?.[1] === name);
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
  /** Hash of a parent parked in `gather` (tierpool.model.keys.PoolKeys.parked). */
  parked(taskId: string): string {
    return `${this.prefix}parked:${taskId}`;
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
