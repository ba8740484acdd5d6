"""The `es-awd` golden area: the Trainer area of esverify.goldens.es_area on this reference's profile (docs/goldens.md),
with its own es-run case: the fma32 double-rounding vector."""
from esverify.goldens import chain
from esverify.goldens.es_area import es_run_case, sample_rewards, trainer_area

from .profile import PROFILE

#: the note on the shared odd-sizes vectors' comment in this area's committed file
ODD_SIZES_NOTE = " (70 crosses es-awd's 32-element tail at 64)"

#: The es-awd fused multiply-add fma32(x, y, a) = rd32(x + y*a), rounded ONCE. An implementation that
#: forms y*a exactly in f64 and then rounds x + y*a to f64 and again to f32 is wrong only where the exact
#: sum lies within half an f64 ulp above an f32 midpoint: rounding to f64 lands on the midpoint and
#: ties-to-even goes down. Random runs hit that about once in 10**8 elements, so no vector caught it.
#: Found by searching sigmas against member 1's noise (seed 20, iid, poly32): with
#: a = rd32(sigma) = 0.013517158105969429 and eps_0 = 2.889845609664917 the product has bit 45 set and
#: the next 29 bits clear, so theta_0 = 174762.65625 (an even f32 whose ulp is 2**-7, twice the midpoint
#: bit) perturbs to 0x482aaaad, where the twice-rounded form gives 0x482aaaac.
FMA_SIGMA = 0.013517158105969429
FMA_THETA = 174762.65625


def fma_double_rounding_cases(profile: str, base: dict) -> list[dict]:
    """The area's own es-run cases (`trainer_area`'s extra_cases): the fma32 double-rounding vector."""
    cfg = {**base, "sigma": FMA_SIGMA, "seed": 20, "scheme": "iid", "mapping": "poly32"}
    return [es_run_case(profile, "fma-double-rounding-f32",
                        "es-awd's fma32 rounds once: perturbing theta_0 = 174762.65625 by sigma = 0.013517158105969429 "
                        "times member 1's eps_0 has an exact sum just above an f32 midpoint, so an f64 product and sum "
                        "rounded twice (to f64, then f32) gives one ulp less (0x482aaaac, not 0x482aaaad) in "
                        "it0.perturb.w[0]", [("w", (64,), "f32")], [(1, sample_rewards(4, 10))],
                        set_elements={(0, 0): FMA_THETA}, **cfg)]


AREA = chain.with_chain(trainer_area(PROFILE, "esverify.references.es_awd.profile.VERSION",   # with its chained MC vector
                                     extra_cases=fma_double_rounding_cases,
                                     odd_sizes_note=ODD_SIZES_NOTE))
