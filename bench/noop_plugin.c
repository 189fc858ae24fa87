/* A SPANK plugin that does nothing: the benchmark's measure of Slurm's own cost of loading one. */
#include <slurm/spank.h>

SPANK_PLUGIN(noop, 1);

int slurm_spank_init(spank_t sp, int ac, char **av)
{
  (void)sp;
  (void)ac;
  (void)av;
  return 0;
}
