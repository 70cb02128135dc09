"""Data: simulators with known ground truth, real-data loaders (Coat, Yahoo!R3, MovieLens,
triples), rating splits, and the preprocessing of implicit feedback (binarisation, hold-outs,
negative sampling)."""

from jaxcal._lazy import lazy_exports

# name -> module. Owners of a module add their public names here.
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "default_data_dir": "jaxcal.data._paths",
        # simulators (jaxcal/data/synthetic.py)
        "simulate_preferences": "jaxcal.data.synthetic",
        "SyntheticData": "jaxcal.data.synthetic",
        "simulate_segments": "jaxcal.data.segments",
        "SegmentData": "jaxcal.data.segments",
        # real data (jaxcal/data/coat.py, yahoo.py, triples.py, preprocessing.py)
        "load_coat": "jaxcal.data.coat",
        "fetch_coat": "jaxcal.data.coat",
        "CoatData": "jaxcal.data.coat",
        "load_yahoo_r3": "jaxcal.data.yahoo",
        "load_triples": "jaxcal.data.triples",
        "Interactions": "jaxcal.data.triples",
        "binarize": "jaxcal.data.preprocessing",
        "holdout_split": "jaxcal.data.preprocessing",
        "sample_negatives": "jaxcal.data.preprocessing",
        "holdout_rate": "jaxcal.data.preprocessing",
        "calibration_pairs": "jaxcal.data.preprocessing",
        "CalibrationPairs": "jaxcal.data.preprocessing",
        "YahooR3Data": "jaxcal.data.yahoo",
        # explicit ratings (jaxcal/data/ratings.py, movielens.py)
        "simulate_ratings": "jaxcal.data.ratings",
        "RatingSimulation": "jaxcal.data.ratings",
        "split_ratings": "jaxcal.data.ratings",
        "load_movielens": "jaxcal.data.movielens",
        "fetch_movielens": "jaxcal.data.movielens",
        "MovieLensData": "jaxcal.data.movielens",
        "default_cache_dir": "jaxcal.data._download",
    },
)
