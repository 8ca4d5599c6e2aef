// refdecode decodes a file as llama.cpp's mtmd helper does
// (tools/mtmd/mtmd-helper.cpp, mtmd_helper_bitmap_init_from_buf), with the
// same defines, so that media's tests can compare against its output:
//
//   refdecode image FILE        stbi_load_from_memory(..., 3): "W H" on
//                               stderr, the RGB bytes on stdout
//   refdecode audio FILE RATE   ma_decoder (f32, 1 channel, RATE) as
//                               decode_audio_from_buf: the samples,
//                               little-endian float32, on stdout
//
// goldens.sh builds it against a llama.cpp tarball.
#define MINIAUDIO_IMPLEMENTATION
#define MA_NO_ENCODING
#define MA_NO_DEVICE_IO
#define MA_NO_RESOURCE_MANAGER
#define MA_NO_NODE_GRAPH
#define MA_NO_ENGINE
#define MA_NO_GENERATION
#define MA_API static
#include "miniaudio/miniaudio.h"

#define STB_IMAGE_IMPLEMENTATION
#include "stb/stb_image.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static std::vector<unsigned char> slurp(const char * path) {
    std::vector<unsigned char> buf;
    FILE * f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    unsigned char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0) buf.insert(buf.end(), tmp, tmp + n);
    fclose(f);
    return buf;
}

int main(int argc, char ** argv) {
    if (argc < 3) { fprintf(stderr, "usage: refdecode image FILE | audio FILE RATE\n"); return 2; }
    std::vector<unsigned char> buf = slurp(argv[2]);
    if (strcmp(argv[1], "image") == 0) {
        int nx, ny, nc;
        unsigned char * data = stbi_load_from_memory(buf.data(), (int) buf.size(), &nx, &ny, &nc, 3);
        if (!data) { fprintf(stderr, "stb: %s\n", stbi_failure_reason()); return 1; }
        fprintf(stderr, "%d %d\n", nx, ny);
        fwrite(data, 1, (size_t) nx * ny * 3, stdout);
        stbi_image_free(data);
        return 0;
    }
    if (strcmp(argv[1], "audio") == 0 && argc == 4) {
        ma_decoder_config config = ma_decoder_config_init(ma_format_f32, 1, (ma_uint32) atoi(argv[3]));
        ma_decoder decoder;
        if (ma_decoder_init_memory(buf.data(), buf.size(), &config, &decoder) != MA_SUCCESS) { fprintf(stderr, "miniaudio: init failed\n"); return 1; }
        ma_uint64 frame_count, frames_read;
        if (ma_decoder_get_length_in_pcm_frames(&decoder, &frame_count) != MA_SUCCESS) { fprintf(stderr, "miniaudio: no length\n"); return 1; }
        std::vector<float> pcm(frame_count);
        if (ma_decoder_read_pcm_frames(&decoder, pcm.data(), frame_count, &frames_read) != MA_SUCCESS) { fprintf(stderr, "miniaudio: read failed\n"); return 1; }
        ma_decoder_uninit(&decoder);
        fprintf(stderr, "%llu %llu\n", (unsigned long long) frame_count, (unsigned long long) frames_read);
        fwrite(pcm.data(), sizeof(float), pcm.size(), stdout);
        return 0;
    }
    fprintf(stderr, "usage: refdecode image FILE | audio FILE RATE\n");
    return 2;
}
