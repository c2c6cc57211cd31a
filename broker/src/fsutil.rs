//! Small file-system primitives shared by the broker's on-disk state.

pub use idem_runtime::atomic_file::replace as write_atomically;
