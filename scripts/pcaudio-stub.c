/* Stands in for pcaudiolib (libpcaudio.so.0) where voxd's binaries are carried to a machine
 * without our packages: the GPU machine (scripts/gpu-pack.sh) and the dataset carry
 * (training/data/package.sh). libespeak-ng links it for playing speech aloud, and through it
 * PulseAudio, ALSA, X11, D-Bus and systemd (about 2.5 MB compressed). voxd only asks eSpeak NG for
 * phonemes and synthesises into memory (AUDIO_OUTPUT_SYNCHRONOUS), never playing anything; eSpeak
 * NG 1.51 still creates its audio device object at initialisation (create_audio_device_object),
 * so this stub answers "no device" there and refuses every other call without touching anything. */
#include <stddef.h>
#include <stdint.h>

struct audio_object;

static const int kNoDevice = -1;

struct audio_object* create_audio_device_object(const char* device, const char* application_name,
                                                const char* description) {
  (void)device;
  (void)application_name;
  (void)description;
  return NULL;
}

int audio_object_open(struct audio_object* object, int format, uint32_t rate, uint8_t channels) {
  (void)object;
  (void)format;
  (void)rate;
  (void)channels;
  return kNoDevice;
}

void audio_object_close(struct audio_object* object) { (void)object; }

void audio_object_destroy(struct audio_object* object) { (void)object; }

int audio_object_write(struct audio_object* object, const void* data, size_t bytes) {
  (void)object;
  (void)data;
  (void)bytes;
  return kNoDevice;
}

int audio_object_drain(struct audio_object* object) {
  (void)object;
  return kNoDevice;
}

int audio_object_flush(struct audio_object* object) {
  (void)object;
  return kNoDevice;
}

const char* audio_object_strerror(struct audio_object* object, int error) {
  (void)object;
  (void)error;
  return "no audio output (voxd's pcaudiolib stub: eSpeak NG only phonemises here)";
}
