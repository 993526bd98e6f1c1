//! The waiting trainings as the database reads them, in the scheduling
//! order of [`crate::policy::order`].

use crate::persistence::waiting::{WaitingKey, WaitingTraining};
use crate::policy::order::waiting_by_fields;

waiting_by_fields!(WaitingTraining, WaitingKey);
