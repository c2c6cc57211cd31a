pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
