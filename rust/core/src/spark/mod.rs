//! What kstate's Spark integration needs in bytes: Spark's `hash()` and partition ids over Arrow
//! buffers, typed state's row encoding of a Spark `StructType`, and the byte layout of a
//! processor's state (variables, timers, TTL index, event time) and the sweep of its expired state.

pub mod decoded_values;
pub mod hash;
pub mod pickled_key;
pub mod row_codec;
pub mod state_layout;
pub mod state_read_ahead;
pub mod ttl_sweep;
