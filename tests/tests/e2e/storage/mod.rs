mod torn_tail;
