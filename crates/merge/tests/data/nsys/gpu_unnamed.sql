-- A TARGET_INFO_GPU with neither the CUDA device nor a name: nothing to name the
-- GPU by.
CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, busLocation TEXT);
INSERT INTO TARGET_INFO_GPU VALUES (0, '0000:01:00.0');
