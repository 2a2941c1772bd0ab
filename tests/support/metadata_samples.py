"""RocketMQ 4.8 offset files as fastjson 1.2.83 writes them (unquoted integer keys, tabs):
consumerOffset.json and delayOffset.json samples. Used by tests/store/test_metadata.py and
test_fastjson.py."""

from __future__ import annotations

# RocketMQ 4.8 consumerOffset.json (no dataVersion, no groupTopicMap), as published 4.8 files show it.
CONSUMER_OFFSET_48 = (
    '{\n\t"offsetTable":{\n'
    '\t\t"TopicTest@please_rename_unique_group_name":{0:6,1:3,2:3,3:2\n\t\t},\n'
    '\t\t"%RETRY%please_rename_unique_group_name@please_rename_unique_group_name":{0:0\n\t\t}\n'
    "\t}\n}"
)
DELAY_OFFSET_48_COMPACT = '{"offsetTable":{1:1\n}}'
DELAY_OFFSET_48 = '{\n\t"offsetTable":{1:1,3:12\n\t}\n}'
