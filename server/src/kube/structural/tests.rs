//! The structural schema engine, table by table.
