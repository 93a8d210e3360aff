"""The training engine: data on the device, augmentation, backbones, heads, objectives, the method
registry, the trainer and its hooks.

    data                           the datasets by name (``load_dataset``); digits and synthetic
    dataset, data_errors           the ``Dataset`` type and its normalisation statistics; ``DataError``
    cifar, safe_pickle, checksums  CIFAR's archives, read without executing their pickles, MD5-checked
    folders, images                your own images (``folder_dataset``); image files decoded safely, or
                                   streamed from disk (``ImageFiles``)
    augment                        the augmentation presets, batched on the device or per image in workers
    workers                        worker processes that live and die with the run that forked them
    backbones, heads               f: images -> z and h: z -> h (the head grammar of ``mini.heads``)
    pretrained_models              the published SSL checkpoints of E6, in their authors' layouts
    objectives, methods            the SSL losses, and one record per method that everything else reads
    loss_curvature                 objectives whose loss Hessian is known in closed form (a method's record)
    recipes                        the one resolution of a run's settings (scale.run, TrainConfig.resolve)
    modules                        your own modules: module:callable specs, the record a run keeps of them
    config                         a run's settings: ``TrainConfig`` (resolved by ``recipes``)
    model, optim                   ``SSLModel`` (backbone + head [+ predictor]); the optimisers and lr schedule
    train, hooks, state, modes     the Trainer, its hooks and their state, eval mode for measurements
    progress                       long measurements announced phase by phase, with an estimate of the rest
    checkpoint, signals            atomic files and checkpoints; SIGINT/SIGTERM: finish the step, save, stop
"""
