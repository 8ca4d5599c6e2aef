package gguf

import "strings"

// ProjectorArchitecture is the general.architecture of a multimodal
// projector: an "mmproj" GGUF, the vision or audio encoder llama.cpp's
// mtmd (clip.cpp) loads beside a text model. It is not a model of its
// own: corral never serves one as a model.
const ProjectorArchitecture = "clip"

// IsProjector reports whether m describes a multimodal projector.
func (m *Metadata) IsProjector() bool { return m.Architecture == ProjectorArchitecture }

// ProjectorInputs reports which media the encoders of the projector m
// describes take: clip.has_vision_encoder and clip.has_audio_encoder, each
// false when absent, as clip.cpp reads them.
func (m *Metadata) ProjectorInputs() (vision, audio bool) {
	vision, _ = m.Bool("clip.has_vision_encoder")
	audio, _ = m.Bool("clip.has_audio_encoder")
	return vision, audio
}

// ProjectorSuffix ends the name corral synth --mmproj gives the projector
// of MODEL.gguf: MODEL.mmproj.gguf.
const ProjectorSuffix = ".mmproj.gguf"

// IsProjectorName reports whether a GGUF file's name (a base name) is one
// projectors go by, in any case: mmproj*.gguf (Hugging Face repositories'
// mmproj-MODEL-F16.gguf, mmproj-model-f16.gguf, which corral pull
// already leaves out of the models it picks) or *.mmproj.gguf (corral
// synth --mmproj's).
func IsProjectorName(name string) bool {
	n := strings.ToLower(name)
	return strings.HasSuffix(n, ".gguf") && (strings.HasPrefix(n, "mmproj") || strings.HasSuffix(n, ProjectorSuffix))
}
