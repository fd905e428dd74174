"""Seed 004, "Scaling Event-Driven Subagent Swarms with Redis Streams": one stream ``agent:tasks:stream`` of
``SwarmTaskPayload`` JSON in a ``payload`` field, read by group ``swarm_workers``.

Verbatim from the article but for: the imports (``os``, ``json`` unused there too), the connection (the test
passes its own client instead of ``redis.Redis(host="localhost", port=6379, db=0)``), and the ``__main__``
block's dispatch, which is the function ``dispatch`` (its two lines unchanged) so that a test can send several.
The worker class is the article's, used to give the stream a group that has already acked some entries and
holds one pending, as a running swarm leaves it.
"""

import time
import uuid

import redis
from pydantic import BaseModel

STREAM_KEY = "agent:tasks:stream"
GROUP_NAME = "swarm_workers"
CONSUMER_NAME = f"worker-{uuid.uuid4().hex[:6]}"

class SwarmTaskPayload(BaseModel):
    task_id: str
    target_role: str
    action: str
    payload: dict

class RedisStreamsSwarmWorker:
    """
    Event-driven agent worker consuming tasks from a Redis Stream Consumer Group
    with automatic pending task claim (XCLAIM) fault recovery.
    """
    def __init__(self, redis_client: redis.Redis):
        self.r = redis_client
        self._setup_consumer_group()

    def _setup_consumer_group(self):
        """
        Creates the Redis Stream consumer group if it does not already exist.
        """
        try:
            self.r.xgroup_create(STREAM_KEY, GROUP_NAME, id="0", mkstream=True)
            print(f"✅ [Redis Streams] Consumer group '{GROUP_NAME}' created.")
        except redis.exceptions.ResponseError as err:
            if "BUSYGROUP" in str(err):
                pass  # Group already exists
            else:
                raise err

    def start_worker_loop(self):
        print(f"🚀 [Worker Agent '{CONSUMER_NAME}'] Listening for stream events on '{STREAM_KEY}'...")
        
        while True:
            try:
                # 1. Periodically check for & claim orphaned tasks (PEL Timeout > 30s)
                self._claim_orphaned_pending_tasks()

                # 2. Consume new task events assigned to this consumer
                entries = self.r.xreadgroup(
                    groupname=GROUP_NAME,
                    consumername=CONSUMER_NAME,
                    streams={STREAM_KEY: ">"},  # '>' means read new un-delivered messages
                    count=1,
                    block=2000  # Block for up to 2 seconds
                )

                if not entries:
                    continue

                for stream_name, message_list in entries:
                    for message_id, data in message_list:
                        self._process_message(message_id, data)

            except Exception as err:
                print(f"❌ [Worker Error] Unexpected error in worker loop: {err}")
                time.sleep(1.0)

    def _process_message(self, message_id: bytes, data: dict):
        msg_id_str = message_id.decode("utf-8")
        task_json_str = data.get(b"payload", b"{}").decode("utf-8")
        
        task = SwarmTaskPayload.model_validate_json(task_json_str)
        print(f"\n⚡ [Worker '{CONSUMER_NAME}'] Processing Task '{task.task_id}' (Msg ID: {msg_id_str})...")

        # Simulate subagent execution
        time.sleep(0.5)
        print(f"  - Executed action '{task.action}' for role '{task.target_role}'.")

        # Acknowledge task completion in Redis Stream (Remove from PEL)
        self.r.xack(STREAM_KEY, GROUP_NAME, message_id)
        print(f"✅ [Task Completed] Sent XACK for message '{msg_id_str}'.")

    def _claim_orphaned_pending_tasks(self):
        """
        Scans Pending Entries List (PEL) and claims tasks unacknowledged for > 30,000ms.
        """
        try:
            # XPENDING summary check
            pending_info = self.r.xpending(STREAM_KEY, GROUP_NAME)
            if pending_info["pending"] == 0:
                return

            # Read pending messages details
            pending_details = self.r.xpending_range(
                STREAM_KEY, GROUP_NAME, min="-", max="+", count=10
            )

            MIN_IDLE_TIME_MS = 30000
            for item in pending_details:
                idle_time = item["idle"]
                msg_id = item["message_id"]

                if idle_time > MIN_IDLE_TIME_MS:
                    print(f"⚠️ [Orphan Recovery] Claiming message '{msg_id}' idle for {idle_time}ms...")
                    # XCLAIM transfers message ownership to this consumer
                    claimed_msgs = self.r.xclaim(
                        STREAM_KEY, GROUP_NAME, CONSUMER_NAME, MIN_IDLE_TIME_MS, [msg_id]
                    )
                    for c_id, c_data in claimed_msgs:
                        self._process_message(c_id, c_data)
        except Exception as err:
            print(f"Error during orphan claim check: {err}")


def dispatch(r_client: redis.Redis, sample_payload: SwarmTaskPayload) -> bytes:
    # XADD task event onto Redis Stream
    msg_id = r_client.xadd(STREAM_KEY, {"payload": sample_payload.model_dump_json()})
    print(f"📥 [Orchestrator] Dispatched task 'task-swarm-101' to Redis Stream. Msg ID: {msg_id.decode('utf-8')}")
    return msg_id
