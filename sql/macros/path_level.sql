-- path_level: one range's (or module's) text as a level of a layer path, where '/' separates the levels.
-- Inputs:  (none: the text comes as a parameter)
-- Parameters:
--   text       VARCHAR: a range's text or a module's qualified name
-- Output: VARCHAR: the text with each '/' written '∕' (U+2215, DIVISION SLASH); NULL stays NULL
-- Rule: a path is split at '/' to find its levels (`tracepipe diff --depth`, the Perfetto export's counters, the
-- report's steps, findings' common paths, a user's `string_split(path, '/')`), so a '/' inside one text
-- (`dynamo_data: compile_id=0/0`, `fwd/bwd`) would read as two levels. Written '∕' it reads the same and stays
-- one level; `layer` and `text` columns keep the text as the trace has it.
CREATE OR REPLACE MACRO path_level(text) AS replace(text, '/', '∕')
