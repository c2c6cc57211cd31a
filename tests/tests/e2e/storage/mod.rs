mod torn_replica;
mod torn_tail;
