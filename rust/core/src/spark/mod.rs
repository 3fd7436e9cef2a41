//! What kstate's Spark integration needs in bytes: Spark's `hash()` and partition ids over Arrow
//! buffers, and typed state's row encoding of a Spark `StructType`.

pub mod hash;
pub mod row_codec;
