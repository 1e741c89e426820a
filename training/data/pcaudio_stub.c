/* A stand-in for libpcaudio.so.0 in the voxd-dataset carry (see package.sh). libespeak-ng links
 * pcaudio for playing audio, and the real library pulls in PulseAudio, ALSA, D-Bus and X11.
 * voxd-dataset only synthesises into memory (AUDIO_OUTPUT_SYNCHRONOUS), which never opens an
 * audio device, so every function here reports that no device is available. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

struct audio_object;

struct audio_object *create_audio_device_object(const char *device, const char *application_name,
                                                const char *description) {
  (void)device;
  (void)application_name;
  (void)description;
  return NULL;
}

int audio_object_open(struct audio_object *object, int format, uint32_t rate, uint8_t channels) {
  (void)object;
  (void)format;
  (void)rate;
  (void)channels;
  return ENODEV;
}

void audio_object_close(struct audio_object *object) { (void)object; }

void audio_object_destroy(struct audio_object *object) { (void)object; }

int audio_object_write(struct audio_object *object, const void *data, size_t bytes) {
  (void)object;
  (void)data;
  (void)bytes;
  return ENODEV;
}

int audio_object_drain(struct audio_object *object) {
  (void)object;
  return ENODEV;
}

int audio_object_flush(struct audio_object *object) {
  (void)object;
  return ENODEV;
}

const char *audio_object_strerror(struct audio_object *object, int error) {
  (void)object;
  (void)error;
  return "no audio device (voxd-dataset's libpcaudio stand-in)";
}
