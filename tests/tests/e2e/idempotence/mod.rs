mod broker_crash;
mod broker_restart;
mod late_batch;
mod lost_ack;
mod out_of_order;
mod producer_expiry;
mod unresolved_sequence;
