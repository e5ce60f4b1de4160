#define TUNING_SCALE 2.0f
