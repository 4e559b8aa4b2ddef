#![allow(dead_code)]

pub mod test;
