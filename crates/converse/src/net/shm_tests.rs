//! Unit tests of the shm module (`net::shm`): two or more modules of one
//! test process stand for processes of a job.
use super::*;
