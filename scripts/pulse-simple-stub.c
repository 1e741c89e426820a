/* Stands in for PulseAudio's simple API (libpulse-simple.so.0) in the dataset carry
 * (training/data/package.sh), where Festival is carried to the GPU machine as the en-slt teacher.
 * The Edinburgh Speech Tools link it for playing audio, and through it PulseAudio, D-Bus, X11,
 * systemd and libsndfile's codecs. The teacher only writes WAV files, never playing anything, so
 * every call here fails without touching anything. The symbols carry the real library's version
 * (PULSE_0, scripts/pulse-simple-stub.map): the speech tools are bound to it, and load at once. */
#include <stddef.h>

struct pa_simple;

static const int kNoServer = 6; /* PA_ERR_CONNECTIONREFUSED */

struct pa_simple* pa_simple_new(const char* server, const char* name, int direction,
                                const char* device, const char* stream_name, const void* spec,
                                const void* channel_map, const void* buffer_attributes,
                                int* error) {
  (void)server;
  (void)name;
  (void)direction;
  (void)device;
  (void)stream_name;
  (void)spec;
  (void)channel_map;
  (void)buffer_attributes;
  if (error != NULL) *error = kNoServer;
  return NULL;
}

int pa_simple_write(struct pa_simple* s, const void* data, size_t bytes, int* error) {
  (void)s;
  (void)data;
  (void)bytes;
  if (error != NULL) *error = kNoServer;
  return -1;
}

int pa_simple_drain(struct pa_simple* s, int* error) {
  (void)s;
  if (error != NULL) *error = kNoServer;
  return -1;
}

void pa_simple_free(struct pa_simple* s) { (void)s; }
