package toolcall

import "strings"

// SeedOSS is ByteDance Seed-OSS's format: Qwen3-Coder's XML inside
// <seed:tool_call> tags, each value written between its tags without
// line breaks around it (a line break there is not part of the value):
//
//	<seed:tool_call>
//	<function=get_weather>
//	<parameter=city>Paris</parameter>
//	<parameter=days>3</parameter>
//	</function>
//	</seed:tool_call>
var SeedOSS Format = qwenXML("seed-oss", "<seed:tool_call>", "</seed:tool_call>", false)

// isSeedOSS reports a template that writes <seed:tool_call>.
func isSeedOSS(src string) bool { return strings.Contains(src, "<seed:tool_call>") }
