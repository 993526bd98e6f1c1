DROP TABLE coordinator_members;
